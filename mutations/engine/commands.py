"""How a container's command line is read as words, as the kubelet and the shell would run it.

The kubelet expands $(NAME) in `command` and `args` from the container's env (literal values, and
valueFrom.fieldRef of the Pod's own metadata); a shell (`sh -c`, `bash -lc --` with the script in args)
runs a script, which is split here with shlex into its commands, with $VAR / ${VAR} / ${VAR:-default},
env assignments, exports and wrappers (exec, env, nohup) understood. Pure string work: no I/O.
"""

from __future__ import annotations

import re
import shlex

from .specs import JsonObject

# Shells whose `-c` script is read as the command line.
_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
# Words that may stand before the server in a script or command: wrappers that run what follows.
_WRAPPERS = {"exec", "env", "nohup", "time", "tini", "--", "dumb-init", "uv", "run"}
# Long command lines are cut: a server's flags fit in far less.
MAX_COMMAND_CHARS = 16384
# Kubernetes expands $(NAME) in command and args from the container's env; shells expand $NAME, ${NAME}.
_KUBE_VAR = re.compile(r"\$(\$)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def env_values(env: object, metadata: JsonObject | None = None) -> dict[str, str]:
    """The container's env values known at admission: literal ones, and valueFrom.fieldRef of the Pod's name,
    namespace, labels and annotations (secrets, config maps and the node are not known until the kubelet)."""
    found: dict[str, str] = {}
    if not isinstance(env, list):
        return found
    for item in env:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        if isinstance(item.get("value"), str):
            found[item["name"]] = _kube_expand(item["value"], found)  # $(NAME) of a variable defined before it
            continue
        source = item.get("valueFrom")
        ref = source.get("fieldRef") if isinstance(source, dict) else None
        path = ref.get("fieldPath") if isinstance(ref, dict) else None
        if isinstance(path, str) and metadata:
            value = field_path_value(metadata, path)
            if value is not None:
                found[item["name"]] = value
    return found


_FIELD_MAP = re.compile(r"^metadata\.(labels|annotations)\[['\"]?([^'\"\]]+)['\"]?\]$")


def field_path_value(metadata: JsonObject, path: str) -> str | None:
    """A fieldRef's value read from the Pod's metadata (name, namespace, a label or an annotation); else None."""
    if path in ("metadata.name", "metadata.namespace"):
        value = metadata.get(path.split(".", 1)[1])
        return value if isinstance(value, str) and value else None
    match = _FIELD_MAP.match(path)
    if match:
        values = metadata.get(match[1])
        value = values.get(match[2]) if isinstance(values, dict) else None
        return value if isinstance(value, str) else None
    return None


def commands_read(container: JsonObject, env: dict[str, str]) -> tuple[list[list[str]], bool]:
    """The commands a container runs, as words: command + args with $(VAR) expanded as the kubelet does; a
    shell's script (`sh -c`, `bash -lc --` with the script in args) split with shlex into its commands, each
    with the shell's $VAR/${VAR} expanded, env assignments and wrappers (exec, env, nohup) taken off."""
    words: list[str] = []
    for key in ("command", "args"):
        value = container.get(key)
        if isinstance(value, list):
            words.extend(_kube_expand(item, env)[:MAX_COMMAND_CHARS] for item in value if isinstance(item, str))
    script = _shell_script(words)
    if script is None:
        return [words], False
    return _script_commands(script, env), True


def _kube_expand(text: str, env: dict[str, str]) -> str:
    """$(NAME) replaced by the env's value as the kubelet does ($$ is a literal $; an unknown name stays)."""
    if "$" not in text:
        return text
    return _KUBE_VAR.sub(lambda m: "$" if m[1] else env.get(m[2], m[0]), text)


def _shell_script(words: list[str]) -> str | None:
    """The script of `sh -c SCRIPT` (any shell, options such as -lc, -ec, -o pipefail, --); None otherwise."""
    if not words or words[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    takes_script = False
    index = 1
    while index < len(words):
        word = words[index]
        index += 1
        if word == "--":
            break
        if word in ("-o", "+o", "-O", "+O"):
            index += 1  # the option's name
            continue
        if not word.startswith(("-", "+")) or word in ("-", "+"):
            index -= 1
            break
        if word.startswith("-") and not word.startswith("--") and "c" in word:
            takes_script = True
    if not takes_script or index >= len(words):
        return None
    return words[index]


_OPERATORS = set(";&|()\n")
_REDIRECTS = ("<", ">")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _script_commands(script: str, env: dict[str, str]) -> list[list[str]]:
    """A shell script's simple commands in order, as words (quotes removed by shlex, as the shell does)."""
    lexer = shlex.shlex(script.replace("\\\n", " "), posix=True, punctuation_chars=";&|()<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    local = dict(env)
    commands: list[list[str]] = []
    current: list[str] = []
    comment = False
    skip_next = False
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: the shell would refuse it too; read it word by word anyway
        tokens = script.split()
    for token in tokens:
        if token and set(token) <= _OPERATORS | set("<>"):
            if any(ch in _OPERATORS for ch in token):
                comment = False
                if current:
                    commands.append(current)
                current = []
            if any(ch in _REDIRECTS for ch in token) and not token.endswith(("&", "|")):
                skip_next = True  # the redirection's target
                if current and current[-1].isdigit():
                    current.pop()  # the descriptor of 2>file
            continue
        if comment:
            continue
        if skip_next:
            skip_next = False
            continue
        if token.startswith("#"):  # a word that starts with # starts a comment, to the end of the line
            comment = True
            continue
        word = _shell_expand(token, local)
        if not current and _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            local[name] = value  # FOO=1 cmd, or FOO=1 alone: later words see it either way
            continue
        if not current and word in ("export", "readonly", "local", "declare"):
            current.append(word)
            continue
        if current[:1] in (["export"], ["readonly"], ["local"], ["declare"]) and _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            local[name] = value
            continue
        if not current and word in _WRAPPERS:
            continue
        current.append(word)
    if current:
        commands.append(current)
    return [c for c in commands if c[:1] not in (["export"], ["readonly"], ["local"], ["declare"])] or [[]]


def _shell_expand(word: str, env: dict[str, str]) -> str:
    """$NAME, ${NAME} and ${NAME:-default} from the env the shell has; an unknown name stays as written."""
    if "$" not in word:
        return word
    return _SHELL_VAR.sub(lambda m: _shell_value(m, env), word)


def _shell_value(match: re.Match[str], env: dict[str, str]) -> str:
    name = match[1] or match[3]
    if name in env:
        return env[name]
    if match[2] is not None:
        return match[2]
    return match[0]


def ray_role(words: list[str]) -> str | None:
    """"head" or "worker" for `ray start --head` / `ray start --address=...`; None for anything else."""
    if "start" not in words:  # most commands: one scan in C, not a split per word
        return None
    for index, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] == "ray" and words[index + 1] == "start":
            rest = words[index + 2:]
            return "head" if "--head" in rest else "worker"
    return None
