def pipeline(p):
    p.output("counts", p.input("words").count(by="word"))
