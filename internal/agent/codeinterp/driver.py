# agentbox code-interpreter driver for Python (any python3 >= 3.8).
#
# The agent starts `python3 -u -c <bootstrap>`; the bootstrap reads this
# file from fd 3 and runs it. The protocol is NDJSON:
#
#   fd 3, from the agent: {"op":"exec","seq","code","env","setenv","max_result"}
#   fd 4, to the agent:   {"ev":"ready","engine"}
#                         {"ev":"start","seq","count"}
#                         {"ev":"result","main","data":{mime: value}}
#                         {"ev":"error","name","value","traceback"}
#                         {"ev":"done","seq","count"}
#
# fds 1 and 2 are the user's stdout and stderr, read by the agent as they
# are written (so subprocess output is captured too). After an execution
# the driver flushes both, then reports done; the agent then appends its
# own end marker to both pipes (the driver never knows it: marker.go).
#
# IPython's InteractiveShell is used when importable; otherwise a small
# engine on the standard library does the same job: last-expression
# results, display(), the _repr_*_ protocol, figures as PNG.

import binascii
import builtins
import json
import linecache
import os
import signal
import sys
import threading
import types

sys.argv = [""]
_DRIVER_FILE = "<agentbox-driver>"
_CTRL_FD, _EVT_FD = 3, 4
_MAIN_THREAD = threading.get_ident()
_CO_COROUTINE = 0x80

# Neither interpreter pipe may leak into processes that user code starts.
for _fd in (_CTRL_FD, _EVT_FD):
    os.set_inheritable(_fd, False)

# --- interrupts -------------------------------------------------------------
#
# The agent interrupts an execution with SIGINT. It must raise
# KeyboardInterrupt in user code only: never while the driver waits for
# commands, and never halfway through writing an event line (the line would
# be cut and the protocol broken), so inside _send it is deferred.

_in_user = False
_in_send = 0
_pending_interrupt = False


def _on_sigint(signum, frame):
    __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
    global _pending_interrupt
    if not _in_user:
        return
    if _in_send:
        _pending_interrupt = True
        return
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, _on_sigint)

# -u made stdout and stderr write-through: every print() would become two
# writes ("hi", "\n") and two events. Line buffering sends whole lines, and
# the driver flushes both streams at the end of each execution.
for _stream in (sys.stdout, sys.stderr):
    try:
        _stream.reconfigure(line_buffering=True, write_through=False)
    except Exception:
        pass

# --- events -------------------------------------------------------------------

_evt_lock = threading.Lock()
_max_result = 16 << 20


def _b64(data):
    # binascii is built in; base64 would import re and more at start-up.
    return binascii.b2a_base64(bytes(data), newline=False).decode("ascii")


def _json_default(o):
    if isinstance(o, (bytes, bytearray)):
        return _b64(o)
    return str(o)


def _finite(o):
    # JSON has no NaN or Infinity; the agent rejects such lines.
    if isinstance(o, float) and (o != o or o in (float("inf"), float("-inf"))):
        return None
    if isinstance(o, dict):
        return {str(k): _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _encode(obj):
    try:
        s = json.dumps(obj, default=_json_default, allow_nan=False)
    except ValueError:
        s = json.dumps(_finite(obj), default=_json_default, allow_nan=False)
    return (s + "\n").encode()


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _send(obj):
    global _in_send, _pending_interrupt
    data = _encode(obj)
    main = threading.get_ident() == _MAIN_THREAD
    if main:
        _in_send += 1
    try:
        with _evt_lock:
            _write_all(_EVT_FD, data)
    except OSError:
        os._exit(1)  # the agent is gone
    finally:
        if main:
            _in_send -= 1
    if main and _pending_interrupt and _in_user and not _in_send:
        _pending_interrupt = False
        raise KeyboardInterrupt


def _note(msg):
    try:
        _write_all(2, ("[agentbox] " + msg + "\n").encode())
    except OSError:
        pass


def _limit_bundle(data):
    out = {}
    for mime, value in data.items():
        if isinstance(value, (bytes, bytearray)):
            value = _b64(value)
        size = len(value) if isinstance(value, str) else len(_encode(value))
        if size > _max_result:
            if mime == "text/plain" and isinstance(value, str):
                value = value[:_max_result] + "..."
            else:
                _note("dropped the %s representation of a result: %d bytes is over the limit of %d" % (mime, size, _max_result))
                continue
        out[mime] = value
    return out


def _publish(data, main):
    data = _limit_bundle(dict(data))
    if data:
        # What was printed before the result reaches the pipe before the
        # agent hears of the result: the agent keeps that order.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        _send({"ev": "result", "main": bool(main), "data": data})


# --- rich representations ------------------------------------------------------

_REPRS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
    ("application/pdf", "_repr_pdf_"),
)


def _method(obj, name):
    try:
        m = getattr(obj, name, None)
    except Exception:
        return None
    return m if callable(m) else None


def _call_repr(obj, name, *args, **kwargs):
    m = _method(obj, name)
    if m is None:
        return None
    try:
        try:
            r = m(*args, **kwargs)
        except TypeError:
            if not (args or kwargs):
                raise
            r = m()
    except Exception as e:
        _note("%s.%s failed: %s: %s" % (type(obj).__name__, name, type(e).__name__, e))
        return None
    if isinstance(r, tuple):  # (data, metadata)
        r = r[0] if r else None
    return r


def _pretty(obj):
    try:
        if type(obj) in (list, tuple, dict, set, frozenset) and len(obj) <= 1000:
            import pprint

            try:
                return pprint.pformat(obj, width=79, sort_dicts=False)
            except TypeError:  # python < 3.8 would sort dict keys
                return repr(obj)
        return repr(obj)
    except Exception as e:
        return "<%s object (repr failed: %s)>" % (type(obj).__name__, e)


def _is_figure(obj):
    mod = sys.modules.get("matplotlib.figure")
    return mod is not None and isinstance(obj, mod.Figure)


def _figure_bundle(fig):
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return {"text/plain": repr(fig), "image/png": _b64(buf.getvalue())}


def _frame_data(obj):
    # E2B's "data" format: a DataFrame's columns.
    t = type(obj)
    if t.__name__ != "DataFrame" or not t.__module__.startswith("pandas"):
        return None
    try:
        cols = obj.to_dict(orient="list")
        return {str(k): [v.isoformat() if hasattr(v, "isoformat") else v for v in vs] for k, vs in cols.items()}
    except Exception:
        return None


def _bundle(obj):
    """The MIME bundle of obj, like IPython's display formatter."""
    if _is_figure(obj):
        try:
            return _figure_bundle(obj)
        except Exception as e:
            _note("rendering the figure failed: %s: %s" % (type(e).__name__, e))
    data = {}
    if not isinstance(obj, type):
        mb = _call_repr(obj, "_repr_mimebundle_", include=None, exclude=None)
        if isinstance(mb, dict):
            data.update(mb)
        for mime, name in _REPRS:
            if mime not in data:
                v = _call_repr(obj, name)
                if v is not None:
                    data[mime] = v
    frame = _frame_data(obj)
    if frame is not None:
        data["e2b/data"] = frame
    if "text/plain" not in data:
        data["text/plain"] = _pretty(obj)
    return data


def display(*objs, raw=False, **kwargs):
    """Show objects as results of the running execution (IPython-like)."""
    for obj in objs:
        if raw and isinstance(obj, dict):
            _publish(obj, False)
        else:
            _publish(_bundle(obj), False)


# --- matplotlib ------------------------------------------------------------------
#
# Figures are drawn with Agg; like Jupyter's inline backend, plt.show() and
# the end of every execution emit each open figure as a PNG result and close
# it. pyplot is patched when it is first imported, by a finder that wraps
# its loader.


def _flush_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        from matplotlib._pylab_helpers import Gcf

        figs = [m.canvas.figure for m in Gcf.get_all_fig_managers()]
    except Exception:
        return
    try:
        for fig in figs:
            try:
                _publish(_figure_bundle(fig), False)
            except Exception as e:
                _note("rendering a figure failed: %s: %s" % (type(e).__name__, e))
    finally:
        plt.close("all")


def _show(*args, **kwargs):
    _flush_figures()


class _PyplotFinder:
    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                continue
            exec_module = spec.loader.exec_module

            def patched(module, _exec=exec_module):
                _exec(module)
                module.show = _show

            spec.loader.exec_module = patched
            return spec
        return None


def _creatable(path):
    """Whether path exists as a writable directory or could be made."""
    p = path
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return os.path.isdir(p) and os.access(p, os.W_OK | os.X_OK)


def _setup_matplotlib():
    sys.meta_path.insert(0, _PyplotFinder())
    if "MPLCONFIGDIR" in os.environ:
        return
    # Without a writable config dir matplotlib warns and rebuilds its font
    # cache in a new temporary directory on every start (seconds).
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    if not _creatable(os.path.join(base, "matplotlib")):
        import tempfile

        os.environ["MPLCONFIGDIR"] = os.path.join(tempfile.gettempdir(), "agentbox-matplotlib-%d" % os.getuid())


# --- errors ------------------------------------------------------------------------


def _error_info(e):
    import traceback

    try:
        te = traceback.TracebackException(type(e), e, e.__traceback__)
        # Drop the driver's own frames (the cell runner, the SIGINT
        # handler) from the exception and everything chained to it.
        todo, seen = [te], set()
        while todo:
            t = todo.pop()
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            t.stack = traceback.StackSummary.from_list([f for f in t.stack if f.filename != _DRIVER_FILE])
            todo += [t.__cause__, t.__context__]
        text = "".join(te.format())
    except Exception:
        text = ""
    try:
        value = str(e)
    except Exception:
        value = "<unprintable %s>" % type(e).__name__
    return {"name": type(e).__name__, "value": value, "traceback": text}


# --- engines -------------------------------------------------------------------------


class _BuiltinEngine:
    """Runs cells on the standard library, IPython-style."""

    name = "builtin"

    def __init__(self, module):
        import ast

        self._ast = ast
        self._flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        self.ns = module.__dict__
        self.count = 0
        self.loop = None
        builtins.display = display

    def next_count(self):
        self.count += 1
        return self.count

    def run(self, code, count):
        ast = self._ast
        filename = "<cell-%d>" % count
        # Tracebacks and inspect show the cell's source lines.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            # A trailing semicolon hides the result, as in IPython.
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
                last = ast.Expression(tree.body.pop().value)
            self._run(compile(tree, filename, "exec", self._flags))
            if last is not None:
                value = self._run(compile(last, filename, "eval", self._flags))
                if value is not None:
                    self.ns["_"] = value
                    _publish(_bundle(value), True)
                    if _is_figure(value):
                        # Shown already: the end-of-cell flush must not repeat it.
                        sys.modules["matplotlib.pyplot"].close(value)
        except BaseException as e:
            return _error_info(e)
        return None

    def _run(self, code):
        result = eval(code, self.ns)
        if code.co_flags & _CO_COROUTINE:  # top-level await
            if self.loop is None:
                import asyncio

                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result


class _IPythonEngine:
    """Runs cells in IPython's InteractiveShell (magics, its display system)."""

    name = "ipython"

    def __init__(self, module):
        from IPython.core.displayhook import DisplayHook
        from IPython.core.displaypub import DisplayPublisher
        from IPython.core.formatters import BaseFormatter
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets import ObjectName, Type, Unicode
        from traitlets.config import Config

        engine = self
        self.error = None

        class Hook(DisplayHook):
            def start_displayhook(self):
                pass

            def write_output_prompt(self):
                pass

            def write_format_data(self, format_dict, md_dict=None):
                _publish(format_dict, True)

            def finish_displayhook(self):
                pass

        class Publisher(DisplayPublisher):
            def publish(self, data, metadata=None, source=None, *args, **kwargs):
                _publish(data, False)

            def clear_output(self, wait=False):
                pass

        class Shell(InteractiveShell):
            displayhook_class = Type(Hook)
            display_pub_class = Type(Publisher)

            def _showtraceback(self, etype, evalue, stb):
                name = getattr(etype, "__name__", "Error")
                try:
                    value = str(evalue)
                except Exception:
                    value = ""
                engine.error = {"name": name, "value": value, "traceback": "\n".join(stb)}

            def enable_gui(self, gui=None):
                pass

        class DataFormatter(BaseFormatter):
            format_type = Unicode("e2b/data")
            print_method = ObjectName("_repr_e2b_data_")
            _return_type = (dict, str)

        cfg = Config()
        cfg.HistoryManager.enabled = False
        cfg.InteractiveShell.colors = "NoColor"
        self.shell = Shell.instance(config=cfg, user_module=module)
        fmt = DataFormatter(parent=self.shell.display_formatter)
        fmt.for_type_by_name("pandas.core.frame", "DataFrame", _frame_data)
        self.shell.display_formatter.formatters["e2b/data"] = fmt

    def next_count(self):
        return self.shell.execution_count

    def run(self, code, count):
        self.error = None
        self.shell.run_cell(code, store_history=True)
        return self.error


def _make_engine(module):
    # Ask the import system's finders directly: importlib.util costs
    # milliseconds of start-up.
    have_ipython = False
    for finder in sys.meta_path:
        try:
            if getattr(finder, "find_spec", None) and finder.find_spec("IPython", None) is not None:
                have_ipython = True
                break
        except Exception:
            continue
    if have_ipython:
        home = os.path.expanduser("~")
        if "IPYTHONDIR" not in os.environ and not _creatable(os.path.join(home, ".ipython")):
            import tempfile

            os.environ["IPYTHONDIR"] = os.path.join(tempfile.gettempdir(), "agentbox-ipython-%d" % os.getuid())
        try:
            return _IPythonEngine(module)
        except Exception as e:
            _note("IPython is installed but could not start (%s: %s); using the built-in driver" % (type(e).__name__, e))
    return _BuiltinEngine(module)


# --- main loop -------------------------------------------------------------------------


def _apply_env(setenv, env):
    for k, v in (setenv or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    saved = {}
    for k, v in (env or {}).items():
        saved[k] = os.environ.get(k)
        os.environ[k] = str(v)
    return saved


def _restore_env(saved):
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _execute(engine, msg):
    global _in_user, _pending_interrupt, _max_result
    seq = msg.get("seq", 0)
    _max_result = msg.get("max_result") or _max_result
    saved = _apply_env(msg.get("setenv"), msg.get("env"))
    count = engine.next_count()
    _send({"ev": "start", "seq": seq, "count": count})
    error = None
    try:
        _in_user = True
        error = engine.run(msg.get("code", ""), count)
        _flush_figures()
    except BaseException as e:  # an interrupt landing outside the engine's handler
        error = error or _error_info(e)
    finally:
        _in_user = False
        _pending_interrupt = False
    _restore_env(saved)
    if error:
        _send(dict(error, ev="error"))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    _send({"ev": "done", "seq": seq, "count": count})


def _main():
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    # User code runs in a fresh __main__ (pickle finds its classes there);
    # the driver's own globals stay out of its way.
    sys.modules["__main__"] = module
    _setup_matplotlib()
    engine = _make_engine(module)
    _send({"ev": "ready", "engine": engine.name, "version": sys.version.split()[0]})
    ctrl = os.fdopen(_CTRL_FD, "rb", buffering=1 << 16)
    while True:
        line = ctrl.readline()
        if not line:
            os._exit(0)  # the agent closed the pipe
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("op") == "exec":
            try:
                _execute(engine, msg)
            except BaseException as e:  # keep the driver alive whatever happened
                _send({"ev": "error", **_error_info(e)})
                _send({"ev": "done", "seq": msg.get("seq", 0)})


_main()
