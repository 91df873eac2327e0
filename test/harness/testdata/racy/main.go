// Command racy increments a counter from two goroutines: without a lock when its first
// argument is "racy", which the race detector reports, and with one otherwise.
package main

import (
	"fmt"
	"os"
	"sync"
)

func main() {
	racy := len(os.Args) > 1 && os.Args[1] == "racy"
	var (
		mu sync.Mutex
		n  int
		wg sync.WaitGroup
	)
	for range 2 {
		wg.Go(func() {
			if !racy {
				mu.Lock()
				defer mu.Unlock()
			}
			n++
		})
	}
	wg.Wait()
	fmt.Println("counted", n)
}
