def pipeline(p):
    words = p.input("words")
    p.output("o",, words)
