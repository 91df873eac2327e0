// Package contract reads and writes the banlieue machine contract on infrastructure
// machines of any kind: on unstructured objects, and as Machine, the contract's part
// of a machine. The core controller uses it so that it never imports a provider's
// types; a third-party provider can use it in its tests to check that its
// kind honours the contract. The contract itself is documented in docs/machine-contract.md.
package contract
