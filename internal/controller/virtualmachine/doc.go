// Package virtualmachine is the core controller: it places VirtualMachines on Providers,
// creates their infrastructure machines through the machine contract and mirrors the
// machines' status back. It never imports a provider.
package virtualmachine
