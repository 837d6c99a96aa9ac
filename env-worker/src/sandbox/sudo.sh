#!/bin/sh
# deskgym sandbox sudo: asks for the profile's password, then runs the command.
apt_answer() {
  cmd=""; pkgs=""
  while [ $# -gt 0 ]; do
    case "$1" in
      -o|-c|-t|-a|--option|--config-file|--target-release) shift ;;
      -*) ;;
      *) if [ -z "$cmd" ]; then cmd="$1"; else pkgs="$pkgs ${1%%=*}"; fi ;;
    esac
    shift
  done
  case "$cmd" in
    update)
      echo "deskgym sandbox: the package lists are the host's (offline); nothing to update"
      return 0 ;;
    install)
      missing=""
      for p in $pkgs; do
        p="${p%%:*}"
        if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ]; then
          echo "$p is already the newest version."
        else
          missing="$missing $p"
        fi
      done
      [ -z "$missing" ] && return 0
      echo "E: deskgym sandbox: not installed on this host:$missing (the sandbox is offline" \
        "and its system read-only; the host installs a profile's packages: scripts/setup.sh)" >&2
      return 100 ;;
    *)
      echo "E: deskgym sandbox: apt $cmd: the sandbox's system is read-only and offline" >&2
      return 100 ;;
  esac
}
pip_answer() {
  cmd=""; pkgs=""
  while [ $# -gt 0 ]; do
    case "$1" in
      -r|--requirement|-e|--editable)
        echo "ERROR: deskgym sandbox: pip $1 is not answered offline; install the packages on the host" >&2
        return 1 ;;
      -c|--constraint|-i|--index-url|--extra-index-url|-f|--find-links|-t|--target|--prefix|--root) shift ;;
      -*) ;;
      *) if [ -z "$cmd" ]; then cmd="$1"; else pkgs="$pkgs $1"; fi ;;
    esac
    shift
  done
  if [ "$cmd" != install ]; then
    echo "ERROR: deskgym sandbox: pip $cmd: the sandbox's system is read-only and offline" >&2
    return 1
  fi
  missing=""
  for p in $pkgs; do
    name=$(printf '%s' "$p" | sed 's/[][<>=!~;@ ].*//')
    # The distribution's metadata, else a module of its name (Debian ships some without).
    if ver=$(python3 -c 'import importlib.metadata as m, importlib.util as u, sys
n = sys.argv[1]
try: print(m.version(n))
except m.PackageNotFoundError:
    if u.find_spec(n.lower().replace("-", "_")) is None: sys.exit(1)
    print("installed")' "$name" 2>/dev/null); then
      echo "Requirement already satisfied: $name ($ver)"
    else
      missing="$missing $name"
    fi
  done
  [ -z "$missing" ] && return 0
  echo "ERROR: deskgym sandbox: not installed on this host's Python:$missing (the sandbox is offline" \
    "and its system read-only; the host installs a profile's packages: scripts/setup.sh)" >&2
  return 1
}
stdin_pw=0
while [ $# -gt 0 ]; do
  case "$1" in
    -S) stdin_pw=1; shift ;;
    -u|-g|-p|-C) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ "$stdin_pw" = 1 ]; then
  IFS= read -r pw || pw=""
else
  printf '[sudo] password for user: ' > /dev/tty 2>/dev/null
  IFS= read -r pw < /dev/tty 2>/dev/null || pw=""
fi
if [ "$pw" != "$(cat /run/deskgym/password)" ]; then
  echo "sudo: incorrect password" >&2
  exit 1
fi
[ $# -eq 0 ] && exit 0
case "${1##*/}" in
  apt|apt-get) shift; apt_answer "$@"; exit $? ;;
  pip|pip3|pip3.*) shift; pip_answer "$@"; exit $? ;;
  python|python3|python3.*)
    if [ "${2:-}" = -m ] && [ "${3:-}" = pip ]; then shift 3; pip_answer "$@"; exit $?; fi ;;
esac
exec "$@"
