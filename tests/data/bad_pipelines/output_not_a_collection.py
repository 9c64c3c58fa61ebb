def pipeline(p):
    p.output("o", 42)
