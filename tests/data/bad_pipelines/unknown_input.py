def pipeline(p):
    p.output("o", p.input("nope").count(by="word"))
