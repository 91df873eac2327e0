// Package install tests banlieue's installation manifests: it renders config/default and
// each provider overlay in config/providers with the kustomize API, applies every object
// to a real kube-apiserver (server-side apply, dry-run first), and runs the core
// controller and a provider impersonating the ServiceAccounts the manifests create, so
// that the RBAC they ship is proven sufficient, and no more than that, by a VM that
// reaches Ready.
package install
