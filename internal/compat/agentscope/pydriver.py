# The persistent interpreter behind run_ipython_cell. It reads one JSON
# request per line on stdin ({"code": "..."}), runs the code in one
# namespace that lives as long as this process, and answers one JSON line
# {"stdout": "...", "stderr": "..."} on its original stdout. While a cell
# runs, file descriptors 1 and 2 point at temporary files, so output of
# print(), of C extensions and of child processes is all captured; the
# protocol uses private duplicates of the original descriptors, and user
# code reads /dev/null as stdin.
import ast
import json
import os
import sys
import tempfile
import traceback

LIMIT = 16 << 20


def main():
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in proto_in:
        try:
            code = json.loads(line)["code"]
        except Exception:
            continue
        out, err = run(code, ns)
        proto_out.write(json.dumps({"stdout": out, "stderr": err}) + "\n")
        proto_out.flush()


def run(code, ns):
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    try:
        execute(code, ns)
    finally:
        flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return read(out), read(err)


def execute(code, ns):
    try:
        tree = ast.parse(code, "<cell>", "exec")
    except SyntaxError as e:
        traceback.print_exception(type(e), e, None)
        return
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    try:
        exec(compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), ns)
            if value is not None:
                ns["_"] = value
                print(repr(value))
    except BaseException as e:  # SystemExit too: the interpreter stays
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)


def flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass


def read(f):
    f.seek(0)
    data = f.read(LIMIT + 1)
    f.close()
    text = data[:LIMIT].decode("utf-8", "replace")
    if len(data) > LIMIT:
        text += "\n[output truncated]\n"
    return text


main()
