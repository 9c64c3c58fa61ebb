"""A loop whose body grows forever: n, n+1, n+2, ... never reaches a fixed point."""


def pipeline(p):
    start = p.input("xs").select("k")

    def grow(x):
        return x.select(k="k + 1").concat(start).distinct()

    p.output("o", start.iterate(grow, max_rounds=4))
