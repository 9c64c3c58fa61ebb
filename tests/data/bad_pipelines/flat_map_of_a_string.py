def pipeline(p):
    p.output("o", p.input("words").flat_map("letter", "word"))
