"""Every exercise's check answers whatever a learner writes: the probes made from each starter.

A check must never stop with a traceback (CONTRIBUTING.md, "Exercises"): whatever the learner wrote, it
says PASSED, NOT DONE YET or NOT YET RIGHT and why. So, in the nbval run of every notebook, right after
an exercise's starter ran, conftest.py calls the check again from the starter's own line, in the same
kernel, with the learner's work replaced by what a learner might write by mistake:
- where the learner writes a function or a class: one that raises, one that returns None and one that
  returns a string;
- where the learner writes a value: None, and a string.
Each call must return, and its text must start with NOT YET RIGHT or NOT DONE YET.

The learner's work is what the starter's top-level statements that hold the `...` bind (a function, a
class, a variable, a `with ... as name`); the check's call is the starter's last statement, and each of
its arguments that reads one of those names is replaced, one argument at a time.
"""
import ast
import json

MARKER = "EXERCISE-PROBES "
RIGHT_STARTS = ("NOT YET RIGHT", "NOT DONE YET")

# What stands in for a learner's function or class (each named as the learner's own), and for a value.
FUNCTION_PROBES = {
    "a function that raises": "raise ValueError('made up by the test run: the learner code raises')",
    "a function that returns None": "return None",
    "a function that returns a string": "return 'a string'",
}
VALUE_PROBES = {"None": "None", "a string": "'a string'"}


def _has_ellipsis(node):
    return any(isinstance(inner, ast.Constant) and inner.value is Ellipsis for inner in ast.walk(node))


def _bound_names(node):
    """The names a top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name: "function"}
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    return {inner.id: "value" for target in targets for inner in ast.walk(target)
            if isinstance(inner, ast.Name)}


def learner_names(starter):
    """{name: "function" or "value"} of what the learner writes in a starter: the names bound by its
    top-level statements that hold a `...`."""
    names = {}
    for node in ast.parse(starter).body:
        if _has_ellipsis(node):
            names.update(_bound_names(node))
    return names


def check_call(starter):
    """The starter's last statement, the call of its check (an ast.Call); ValueError when it is not."""
    body = ast.parse(starter).body
    last = body[-1] if body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and ast.unparse(last.value.func).startswith("check_")):
        raise ValueError("the starter's last line is not a call of its check_...(...)")
    return last.value


def probe_calls(starter):
    """[(what stands in, for which argument, the call's source with it)] for one starter."""
    names = learner_names(starter)
    call = check_call(starter)
    arguments = [(index, None, value) for index, value in enumerate(call.args)]
    arguments += [(None, keyword.arg, keyword.value) for keyword in call.keywords]
    probes = []
    for index, keyword, value in arguments:
        read = {inner.id for inner in ast.walk(value) if isinstance(inner, ast.Name)} & set(names)
        if not read:
            continue
        if isinstance(value, ast.Name) and names[value.id] == "function":
            stand_ins = {what: f"__made_up[{what!r}]" for what in FUNCTION_PROBES}
        else:
            stand_ins = {what: code for what, code in VALUE_PROBES.items()}
        for what, code in stand_ins.items():
            changed = ast.parse(ast.unparse(call), mode="eval").body
            replacement = ast.parse(code, mode="eval").body
            if index is not None:
                changed.args[index] = replacement
            else:
                next(k for k in changed.keywords if k.arg == keyword).value = replacement
            probes.append((what, ast.unparse(value), ast.unparse(changed)))
    return probes


def probe_code(starter):
    """The code the kernel runs: every probe call, each answer collected, one line of JSON printed."""
    names = learner_names(starter)
    function = next((name for name, kind in names.items() if kind == "function"), "answer")
    lines = ["def __made_up_functions():", "    made = {}"]
    for what, body in FUNCTION_PROBES.items():
        lines += [f"    def {function}(*args, **kwargs):", f"        {body}", f"    made[{what!r}] = {function}"]
    lines += ["    return made", "", "", "__made_up = __made_up_functions()", "__said = []"]
    for what, argument, call in probe_calls(starter):
        lines += ["try:", f"    __answer = str({call})",
                  "except BaseException as __error:  # a traceback: what the test reports",
                  "    __answer = 'TRACEBACK ' + type(__error).__name__ + ': ' + str(__error)",
                  f"__said.append([{what!r}, {argument!r}, __answer])"]
    lines += ["import json as __json", f"print({MARKER!r} + __json.dumps(__said))",
              "del __made_up_functions, __made_up, __said, __json"]
    return "\n".join(lines) + "\n"


def probe_problems(printed):
    """What went wrong in the probes' run, from what it printed ([] when every probe was answered)."""
    lines = [line for line in printed.splitlines() if line.startswith(MARKER)]
    if not lines:
        return [f"the probes printed no answers; they printed: {printed[-2000:]!r}"]
    said = json.loads(lines[-1][len(MARKER):])
    if not said:
        return ["the starter's check call reads none of the learner's names: no probe was made"]
    return [f"with {what} for {argument}, the check said {answer[:300]!r}, not NOT YET RIGHT or "
            f"NOT DONE YET" for what, argument, answer in said if not answer.startswith(RIGHT_STARTS)]
