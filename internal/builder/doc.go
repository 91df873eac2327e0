// Package builder has builders of banlieue's API objects, with the defaults the examples
// and the test suites share. Each builder takes functional options that change the object
// after its defaults are set, in the manner of cluster-api's util/test/builder; a suite
// keeps its own defaults by passing options where it calls one.
//
// The package imports only api/ and Kubernetes API packages, so that the development
// environment can use it as well as the tests.
package builder
