package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestInterruptibleEndsOnSIGINT: SIGINT ends the context the commands run with,
// saying which signal it was.
func TestInterruptibleEndsOnSIGINT(t *testing.T) {
	ctx, stop := interruptible()
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not end the context")
	}
	if cause := context.Cause(ctx); cause == nil || cause.Error() != "interrupt signal received" {
		t.Errorf("the context ended by %v; want the signal", cause)
	}
}
