#!/usr/bin/env bash
# Checks that the Dockerfile's build stage (the stage whose RUN runs `cargo build`) can compile
# from what its COPY lines put in the image, without a Docker engine: the paths those COPY lines
# copy (less what .dockerignore excludes) are copied into a fresh temporary folder, laid out as
# under the stage's WORKDIR, and each `cargo build` of the stage's RUN runs there as `cargo check`
# for the host (its --bin, --locked and feature arguments kept; --release, --profile and --target
# dropped), with CARGO_TARGET_DIR set to this repository's target/ (or to CARGO_TARGET_DIR when
# that is set) so the dependencies `cargo clippy` already checked are reused. Rules, each named when it breaks:
#   - the Dockerfile must have exactly one stage that runs `cargo build`;
#   - every COPY source must exist in the build context (and not be excluded by .dockerignore);
#   - every file the manifest declares must be in the build context (targets such as [[bench]],
#     build scripts);
#   - Cargo.lock must be in the build context and current (--locked);
#   - the build context must compile (modules, include_str!/include_bytes! files).
# Usage: scripts/check-docker-context.sh [--dockerfile PATH] [--keep]  (--keep leaves the folder).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$PWD"

dockerfile=Dockerfile
keep=0
while (($#)); do
    case "$1" in
        --dockerfile) dockerfile="${2:?--dockerfile needs a path}"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "check-docker-context: unknown argument '$1'" >&2; exit 64 ;;
    esac
done

say() { printf 'check-docker-context: %s\n' "$*"; }
broke() {
    printf 'check-docker-context: FAILED: %s\n' "$1" >&2
    shift
    local detail
    for detail in "$@"; do
        [[ -n $detail ]] && printf '%s\n' "$detail" >&2
    done
    exit 1
}

started=$SECONDS
work="$(mktemp -d "${TMPDIR:-/tmp}/gpuinfer-docker-context.XXXXXX")"
if ((keep)); then
    trap 'say "kept $work"' EXIT
else
    trap 'rm -rf "$work"' EXIT
fi
ctx="$work/ctx"
mkdir "$ctx"

# Python reads the Dockerfile and .dockerignore and lays the build stage's files out in $ctx.
# It prints a summary on stderr and the cargo arguments on stdout, one per line; exit 3 means a
# rule broke (its message is the last stderr line).
plan="$work/plan"
status=0
python3 - "$dockerfile" "$repo" "$ctx" >"$plan" 2>"$work/plan.err" <<'PY' || status=$?
import glob, json, os, re, shlex, shutil, sys

dockerfile, context, out = sys.argv[1], sys.argv[2], sys.argv[3]

def fail(rule, detail):
    print(f"{rule}: {detail}", file=sys.stderr)
    sys.exit(3)

def note(msg):
    print(msg, file=sys.stderr)

# --- Dockerfile instructions: continuation lines joined, comments dropped ---------------------
with open(os.path.join(context, dockerfile), encoding="utf-8") as f:
    raw = f.read().split("\n")
escape = "\\"
for line in raw:
    m = re.match(r"#\s*escape\s*=\s*(\S)", line)
    if m:
        escape = m.group(1)
    elif not line.startswith("#") or not re.match(r"#\s*\w+\s*=", line):
        break
instructions, buf, start = [], "", 0
for number, line in enumerate(raw, 1):
    stripped = line.strip()
    if not buf and (not stripped or stripped.startswith("#")):
        continue
    if buf and stripped.startswith("#"):
        continue
    if not buf:
        start = number
    if line.rstrip().endswith(escape):
        buf += line.rstrip()[:-1] + " "
        continue
    buf += line
    word, _, rest = buf.strip().partition(" ")
    instructions.append((start, word.upper(), rest.strip()))
    buf = ""

def flags(text):
    """Leading --flag[=value] words of an instruction, and the rest."""
    found = {}
    while True:
        m = re.match(r"--([\w-]+)(?:=(\S*))?\s*", text)
        if not m:
            return found, text
        found.setdefault(m.group(1), []).append(m.group(2))
        text = text[m.end():]

stages, stage = [], None
for number, word, rest in instructions:
    if word == "FROM":
        parts = flags(rest)[1].split()
        name = parts[2].lower() if len(parts) >= 3 and parts[1].lower() == "as" else str(len(stages))
        parent = next((earlier for earlier in stages if earlier["name"] == parts[0].lower()), None)
        stage = {"name": name, "line": number, "body": [], "parent": parent}
        stages.append(stage)
    elif stage is not None:
        stage["body"].append((number, word, rest))

def cargo_builds(command):
    """The arguments of each `cargo build` in a RUN command."""
    found = []
    for segment in re.split(r"&&|\|\||;|\|", command):
        words = shlex.split(segment)
        for i in range(len(words) - 1):
            if os.path.basename(words[i]) == "cargo" and words[i + 1] == "build":
                found.append(words[i + 2:])
    return found

builders = []
for st in stages:
    for number, word, rest in st["body"]:
        if word == "RUN":
            builds = cargo_builds(flags(rest)[1])
            if builds:
                builders.append((st, number, builds))
if len(builders) != 1:
    where = ", ".join(f"stage {b[0]['name']} line {b[1]}" for b in builders) or "none"
    fail("the Dockerfile must have exactly one stage that runs `cargo build`", f"found {where}")
st, run_line, builds = builders[0]

# --- cargo check arguments of each build: what selects the targets, features and lock behaviour -----
with_value = {"--bin", "--example", "--test", "--bench", "-p", "--package", "--features", "-F", "--manifest-path"}
alone = {"--locked", "--frozen", "--offline", "--bins", "--lib", "--all-features", "--no-default-features",
         "--workspace", "--examples", "--tests", "--benches", "--all-targets"}
dropped_with_value = {"--target", "--profile", "-j", "--jobs", "--target-dir", "--message-format", "--color"}
dropped_alone = {"--release", "-r", "-v", "-vv", "--verbose", "-q", "--quiet"}

def check_args_of(build_args):
    check_args, i = [], 0
    while i < len(build_args):
        word = build_args[i]
        name, eq, value = word.partition("=")
        if name in with_value or name in dropped_with_value:
            if not eq:
                i += 1
                value = build_args[i] if i < len(build_args) else ""
            if name in with_value:
                if "$" in value:
                    fail("the build stage's cargo arguments can be read", f"{word} {value} uses a variable (line {run_line})")
                check_args += [name, value]
        elif word in alone:
            check_args.append(word)
        elif word not in dropped_alone:
            fail("the build stage's cargo arguments can be read", f"unknown cargo build argument {word!r} (line {run_line})")
        i += 1
    return check_args

checks = [check_args_of(build_args) for build_args in builds]

# --- .dockerignore, as BuildKit reads it (moby patternmatcher) ---------------------------------
def compile_pattern(pattern):
    regex, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern[i + 1:i + 2] == "*":
                i += 1
                if pattern[i + 1:i + 2] == "/":
                    i += 1
                if i + 1 >= len(pattern):
                    regex += ".*" if regex == "^" else "(/.*)?"
                else:
                    regex += "(.*/)?"
            else:
                regex += "[^/]*"
        elif ch == "?":
            regex += "[^/]"
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                regex += re.escape(ch)
            else:
                cls = pattern[i + 1:end]
                regex += "[" + ("^" + cls[1:] if cls.startswith("!") else cls) + "]"
                i = end
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            regex += re.escape(pattern[i])
        else:
            regex += re.escape(ch)
        i += 1
    return re.compile(regex + "$")

ignore = []
ignore_file = os.path.join(context, ".dockerignore")
if os.path.exists(ignore_file):
    with open(ignore_file, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            exception = line.startswith("!")
            if exception:
                line = line[1:].strip()
            line = os.path.normpath(line).lstrip("/")
            if line in ("", "."):
                continue
            ignore.append((exception, compile_pattern(line)))

def excluded(rel):
    parents = rel.split("/")
    matched = False
    for exception, regex in ignore:
        hit = bool(regex.match(rel)) or any(regex.match("/".join(parents[:n])) for n in range(1, len(parents)))
        if hit:
            matched = not exception
    return matched

# --- the COPY lines of the build stage ----------------------------------------------------------
# A stage built FROM an earlier stage starts with that stage's files and WORKDIR.
chain = [st]
while chain[0]["parent"] is not None:
    chain.insert(0, chain[0]["parent"])
body = [item for ancestor in chain for item in ancestor["body"] if ancestor is not st or item[0] < run_line]
workdir, files, copied = "/", {}, []
for number, word, rest in body:
    if word == "WORKDIR":
        workdir = os.path.normpath(os.path.join(workdir, rest.strip().strip('"')))
        continue
    if word == "ADD":
        fail("the build stage's COPY lines can be read", f"line {number}: ADD is not supported here, use COPY")
    if word != "COPY":
        continue
    opts, text = flags(rest)
    unknown = set(opts) - {"from", "chown", "chmod", "link"}
    if unknown:
        fail("the build stage's COPY lines can be read", f"line {number}: unsupported flag(s) {sorted(unknown)}")
    if "from" in opts:
        note(f"  line {number}: COPY --from={opts['from'][0]} (another stage or image) not checked")
        continue
    words = json.loads(text) if text.startswith("[") else shlex.split(text)
    sources, dest = words[:-1], words[-1]
    to_dir = dest.endswith("/") or len(sources) > 1
    dest = os.path.normpath(os.path.join(workdir, dest))
    for source in sources:
        if "$" in source:
            fail("the build stage's COPY lines can be read", f"line {number}: {source} uses a variable")
        rel = os.path.normpath(source).lstrip("/")
        if rel.startswith(".."):
            fail("every COPY source must exist in the build context", f"line {number}: {source} is outside the context")
        rel = "" if rel == "." else rel
        matches = [os.path.relpath(p, context) for p in
                   glob.glob(os.path.join(context, rel), include_hidden=True)] if rel and glob.has_magic(rel) else [rel]
        matches = [m if m != "." else "" for m in matches
                   if os.path.lexists(os.path.join(context, m)) and not (m and excluded(m))]
        if not matches:
            why = " (excluded by .dockerignore)" if rel and os.path.lexists(os.path.join(context, rel)) else ""
            fail("every COPY source must exist in the build context", f"line {number}: {source} not found{why}")
        for match in matches:
            path = os.path.join(context, match)
            if os.path.isdir(path) and not os.path.islink(path):
                count = 0
                for root, dirs, names in os.walk(path):
                    dirs.sort()
                    for name in sorted(names):
                        src_rel = os.path.relpath(os.path.join(root, name), context)
                        if excluded(src_rel):
                            continue
                        inside = os.path.relpath(os.path.join(root, name), path)
                        files[os.path.normpath(os.path.join(dest, inside))] = src_rel
                        count += 1
                copied.append(f"{match or '.'}/ ({count} files) -> {dest}")
            else:
                target = os.path.join(dest, os.path.basename(match)) if to_dir else dest
                files[target] = match
                copied.append(f"{match} -> {target}")

# Lay the files out relative to the WORKDIR the cargo RUN line runs in.
for target, src_rel in sorted(files.items()):
    inside = os.path.relpath(target, workdir)
    if inside.startswith(".."):
        note(f"  {src_rel} -> {target}: outside WORKDIR {workdir}, not laid out")
        continue
    where = os.path.join(out, inside)
    os.makedirs(os.path.dirname(where), exist_ok=True)
    shutil.copy2(os.path.join(context, src_rel), where, follow_symlinks=False)

via = "".join(f" (FROM {c['name']})" for c in reversed(chain[:-1]))
note(f"  build stage '{st['name']}'{via} (line {st['line']}), cargo build on line {run_line}, WORKDIR {workdir}")
for line in copied:
    note(f"  copied {line}")
print("\n".join("\t".join(args) for args in checks))
PY
case $status in
    0) ;;
    3) broke "$(tail -n 1 "$work/plan.err")" "$(head -n -1 "$work/plan.err")" ;;
    *) broke "could not read $dockerfile (exit $status)" "$(cat "$work/plan.err")" ;;
esac
cat "$work/plan.err"

# The target folder `cargo clippy` used: this repository's target/, or CARGO_TARGET_DIR when set.
target_dir="${CARGO_TARGET_DIR:-target}"
[[ $target_dir == /* ]] || target_dir="$repo/$target_dir"
log="$work/cargo.log"
# One line of the plan per `cargo build` in the stage's RUN: its check arguments, tab-separated.
while IFS=$'\t' read -r -a args; do
    say "cargo check ${args[*]} (host target, CARGO_TARGET_DIR=$target_dir) in $ctx"
    if ! (cd "$ctx" && CARGO_TARGET_DIR="$target_dir" cargo check "${args[@]}") >"$log" 2>&1; then
        rule="the build context must compile (a module or include_str!/include_bytes! file outside the copied paths?)"
        if grep -qE "failed to (parse|load) manifest|could not find \`Cargo.toml\`" "$log"; then
            rule="every file the manifest declares must be in the build context"
        elif grep -qE "lock file .* needs to be updated|cannot (create|update) the lock file|--locked was passed" "$log"; then
            rule="Cargo.lock must be in the build context and current (--locked)"
        fi
        broke "$rule: cargo check ${args[*]} failed in the build stage's context ($((SECONDS - started)) s):" "$(grep -vE '^\s*(Checking|Compiling|Blocking|Locking|Updating|Downloaded|Downloading) ' "$log" | head -n 30)"
    fi
    checked=$(grep -cE '^\s*(Checking|Compiling) ' "$log" || true)
    say "ok: the build stage's context compiles with ${args[*]} ($((SECONDS - started)) s; $checked crate(s) checked, the rest reused from target/)"
done <"$plan"
