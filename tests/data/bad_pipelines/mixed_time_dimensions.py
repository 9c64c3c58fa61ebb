def pipeline(p):
    words = p.input("words")
    strings = p.input("strings").select(word="s")
    p.output("o", words.concat(strings))
