def pipeline(p):
    p.output("../x", p.input("words").count(by="word"))
