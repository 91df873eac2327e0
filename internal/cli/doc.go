// Package cli builds the banlieue command and its subcommands: controller and
// provider, and, in the development build (-tags dev), dev and sim from devcmd.
// Controllers are wired here explicitly, one subcommand per process kind, never
// through init registries.
package cli
