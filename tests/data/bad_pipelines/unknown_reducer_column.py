def pipeline(p):
    p.output("o", p.input("xs").sum(by="k", column="nope"))
