#!/usr/bin/env bash
# Black-box tests of the command line: help, version, exit codes, usage errors.
. "${CA_REPO:?run through tests/run.sh (make test), which sets CA_REPO}/tests/it/lib.sh"

run "$CA" --help;               expect "top-level help" 0 "exit codes:"
run "$CA" help;                 expect "help command" 0 "commands:"
run "$CA";                      expect "no command is a usage error" 2 "" "usage:"
run "$CA" --version;            expect "--version" 0 "cuda-agent $(cat "$CA_REPO/VERSION")"
run "$CA" version;              expect "version command" 0 "cuda-agent "
run "$CA" frobnicate;           expect "unknown command" 2 "" "unknown command 'frobnicate'"
run "$CA" --bogus;              expect "unknown global option" 2 "" "unknown option '--bogus'"
run "$CA" --log-level loud data list x; expect "bad log level" 2 "" "--log-level"
run "$CA" workspace;            expect "workspace without subcommand" 2 "" "missing subcommand"
run "$CA" workspace explode;    expect "unknown subcommand" 2 "" "unknown subcommand 'explode'"
run "$CA" version extra;        expect "unexpected argument" 2 "" "unexpected argument 'extra'"
for c in "workspace" "workspace create" "workspace check" "data" "data list" "data show" \
         "data import" "version"; do
    # shellcheck disable=SC2086
    run "$CA" $c --help;        expect "$c --help" 0 "usage: cuda-agent $c"
done
run "$CA" help workspace;       expect "help workspace" 0 "create"
run "$CA" help nothing;         expect "help for unknown command" 2 "" "unknown command 'nothing'"
run "$CA" workspace create --nope x; expect "unknown option to create" 2 "" "unknown option '--nope'"
run "$CA" workspace create --nope x; expect "usage hint names the command" 2 "" \
    "try 'cuda-agent workspace create --help'"
run "$CA" candidate-sandbox --nope; expect "a hyphen inside a command's name stays in the hint" 2 \
    "" "try 'cuda-agent candidate-sandbox --help'"
run "$CA" workspace create x;   expect "create without --task" 2 "" "--task is required"
run "$CA" workspace create --task; expect "option without value" 2 "" "needs a value"
run "$CA" workspace create --json=1 --task t x; expect "flag with a value" 2 "" "takes no value"
run "$CA" data import x.jsonl;  expect "import without -o" 2 "" "--output is required"
run "$CA" data list;            expect "list without source" 2 "" "missing argument"
finish
