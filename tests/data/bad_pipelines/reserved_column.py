def pipeline(p):
    p.output("o", p.input("words").select("word", diff="1"))
