// Package nocloud builds the seed of cloud-init's NoCloud data source: an ISO 9660
// image labelled "cidata" holding user-data, meta-data (the instance ID and host name)
// and, when the provider knows the guest's addressing, network-config. It is built in
// process, with no tool on the host, so every provider that attaches a seed CD-ROM to
// its VMs (libvirt, Proxmox VE) makes the same one.
package nocloud
