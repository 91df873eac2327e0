// Package own stands for the project's own code.
package own

import "sync"

// Race writes one variable from two goroutines without a lock: the project's own race.
func Race() {
	var n int
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { n++ })
	}
	wg.Wait()
}
