//go:build mutant_bucket_refills_twice

package actors

func init() { mutantBucketRefillsTwice = true }
