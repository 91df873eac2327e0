// Package placement decides which Provider and failure domain a VirtualMachine runs on.
// It is pure: the core controller gathers its inputs from the cache and this package
// only computes, so one decision can be benchmarked and tested without an API server.
package placement
