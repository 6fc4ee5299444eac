package bench

// WaitAll is waitAll, for the stall's test.
var WaitAll = waitAll
