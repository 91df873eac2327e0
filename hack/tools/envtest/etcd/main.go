// Command etcd is the etcd server, built from its library so that the version is
// pinned in etcd/go.mod and no prebuilt binary has to be downloaded.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
