// Package cli builds the banlieue command and its subcommands. Controllers are wired
// here explicitly, one subcommand per process kind, never through init registries.
package cli
