// Package install tests banlieue's installation manifests: it renders config/default and
// each provider overlay in config/providers with the kustomize API, applies every object
// to a real kube-apiserver (server-side apply, dry-run first), and runs the core
// controller and a provider impersonating the ServiceAccounts the manifests create, so
// that the RBAC they ship is proven sufficient, and no more than that, by a VM that
// reaches Ready. It renders the Helm chart charts/banlieue too, with helm from $HELM or
// 'bash hack/tool.sh helm', dry-run applies its objects and checks that it installs what
// kustomize does.
package install
