def pipeline(p):
    p.output("o", p.input("../x").count(by="word"))
