def pipeline(p):
    words = p.input("words")
    raise ValueError("no outputs today")
