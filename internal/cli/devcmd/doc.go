// Package devcmd holds the subcommands of banlieue's development build: 'dev' (a local
// control plane with simulated backends, ready for kubectl apply) and 'sim' (one
// simulator on its own). They bring vcsim, the Proxmox VE simulator and envtest with
// them, so the production binary does not link this package: cmd/banlieue adds its
// commands only when built with the build tag dev, as 'make build' and 'make dev' do;
// the Dockerfile builds without it.
package devcmd
