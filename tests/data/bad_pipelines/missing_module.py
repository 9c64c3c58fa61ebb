import no_such_module_for_ddcli


def pipeline(p):
    p.output("o", p.input("words"))
