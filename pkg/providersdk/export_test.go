package providersdk

// KindsServed is kindsServed, for the envtest suite's check against a real RESTMapper.
var KindsServed = kindsServed
