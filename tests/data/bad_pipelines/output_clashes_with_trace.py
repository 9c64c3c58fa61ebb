def pipeline(p):
    p.output("names", p.input("words").negate())
