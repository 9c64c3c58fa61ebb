def pipeline(p):
    p.output("o", p.input("xs").join(p.input("names"), on="k"))
