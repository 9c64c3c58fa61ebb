def pipeline(p):
    p.input("words").count(by="word")
