// Package capi is the Cluster API conformance test: Cluster API's own core manager
// (built from the sigs.k8s.io/cluster-api module by hack/capi.sh, run as a process)
// drives banlieue's providers against their backends' simulators through the v1beta2
// InfraMachine contract, as a Cluster API user would. It also installs banlieue's
// clusterctl repository with the clusterctl built from the same module.
//
// What envtest cannot show: no pod runs, so there is no workload cluster and no Node.
// Cluster API's Machine controller therefore stops at phase Provisioned (Running needs
// the Node named by spec.providerID), and a MachineHealthCheck never sees a Node to
// judge; the scenarios check what Cluster API reports up to Provisioned and remediate
// by deleting a Machine, as a MachineHealthCheck does. No admission webhook of Cluster
// API's is registered with the API server (their certificates would need cert-manager),
// so the tests write the fields Cluster API's defaulting webhooks would set.
package capi
