def build(p):
    p.output("o", p.input("words"))
