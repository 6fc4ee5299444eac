package bench

// WaitAll is waitAll, for the stall's test.
var WaitAll = waitAll

// Scrape is scrape, for the test of a /metrics that does not answer.
var Scrape = scrape
