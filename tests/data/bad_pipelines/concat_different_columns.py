def pipeline(p):
    xs = p.input("xs")
    p.output("o", xs.concat(xs.select("k")))
