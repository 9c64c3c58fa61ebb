def pipeline(p):
    loop = p.loop()
    v = loop.variable(p.input("words"))
    p.output("o", loop.leave(v))
