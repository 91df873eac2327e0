// Package third stands for a library the project cannot change: Race races inside it,
// with no frame of the caller's in either access.
package third

import "sync"

// Race writes one variable from two goroutines it starts itself, without a lock.
func Race() {
	var n int
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { n++ })
	}
	wg.Wait()
}
