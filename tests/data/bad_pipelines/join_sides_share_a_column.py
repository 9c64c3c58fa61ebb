def pipeline(p):
    xs = p.input("xs")
    p.output("o", xs.join(xs.select("k", "v"), on="k"))
