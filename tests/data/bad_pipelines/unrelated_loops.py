def pipeline(p):
    words = p.input("words")
    a, b = p.loop(), p.loop()
    x, y = a.variable(words), b.variable(words)
    x.set(x.concat(y))
    y.set(y)
    p.output("o", a.leave(x))
