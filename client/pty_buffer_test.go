package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

func TestOutputBufferFlowControl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b := newOutputBuffer()
	big := bytes.Repeat([]byte("x"), ptyBufferSize+10)
	putDone := make(chan error, 1)
	go func() { putDone <- b.put(ctx, big) }()
	select {
	case err := <-putDone:
		t.Fatalf("put past the bound returned %v without waiting", err)
	case <-time.After(50 * time.Millisecond):
	}
	buf := make([]byte, 100)
	if n, err := b.Read(buf); n != 100 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if err := <-putDone; err != nil {
		t.Fatalf("put after room was made: %v", err)
	}
	b.close(nil)
	n, err := io.Copy(io.Discard, b)
	if err != nil || n != int64(len(big)-100) {
		t.Errorf("rest = %d bytes, %v", n, err)
	}
}

func TestOutputBufferDrainDropsInsteadOfWaiting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b := newOutputBuffer()
	if err := b.put(ctx, make([]byte, ptyBufferSize)); err != nil {
		t.Fatal(err)
	}
	putDone := make(chan error, 1)
	go func() { putDone <- b.put(ctx, []byte("more")) }()
	time.Sleep(20 * time.Millisecond)
	b.drain()
	if err := <-putDone; err != nil {
		t.Fatal(err)
	}
	if err := b.put(ctx, []byte("even more")); err != nil {
		t.Fatal(err)
	}
	b.close(errors.New("gone"))
	n, err := io.Copy(io.Discard, b)
	if n != ptyBufferSize || err == nil || err.Error() != "gone" {
		t.Errorf("read %d bytes, %v", n, err)
	}
}

func TestOutputBufferCancelAndCloseReader(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := newOutputBuffer()
	_ = b.put(ctx, make([]byte, ptyBufferSize))
	putDone := make(chan error, 1)
	go func() { putDone <- b.put(ctx, []byte("x")) }()
	cancel()
	select {
	case err := <-putDone:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("put after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("put ignored cancellation")
	}

	b = newOutputBuffer()
	_ = b.put(context.Background(), make([]byte, ptyBufferSize))
	go func() { putDone <- b.put(context.Background(), []byte("x")) }()
	b.closeReader()
	select {
	case err := <-putDone:
		if err != nil {
			t.Errorf("put after closeReader: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("put blocked after closeReader")
	}
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Read after closeReader: %v", err)
	}
}
