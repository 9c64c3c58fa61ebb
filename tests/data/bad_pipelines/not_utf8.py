def pipeline(p):
    p.output("o", p.input("wérds"))
