def pipeline(p):
    p.output("o", p.input("words").select(z="nope + 1"))
