def pipeline(p):
    p.output("o", p.input("words").leave())
