def pipeline(p):
    p.output("o", p.input("words").count(by="nope"))
