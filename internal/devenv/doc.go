// Package devenv runs banlieue's all-in-one development control plane: a local etcd and
// kube-apiserver built from source (the envtest assets), banlieue's CRDs installed, and
// an admin kubeconfig written to disk for kubectl.
package devenv
