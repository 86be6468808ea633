// Command duroq runs duroq's demos and tools.
//
//	duroq queue-demo [-db path] [-customers N] [-events N] [-workers N]
//
// queue-demo runs the embedded queue end to end on a SQLite file: it enqueues order
// events keyed by customer, processes them with a consumer whose handler fails now and
// then (retried with backoff), and checks that every customer's events were handled
// once each, in order.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "queue-demo":
		err = queueDemo(os.Args[2:])
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "duroq: unknown command %q\n\n", os.Args[1])
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "duroq:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: duroq <command> [flags]

commands:
  queue-demo   run per-customer ordered processing on an embedded SQLite queue`)
	os.Exit(2)
}
