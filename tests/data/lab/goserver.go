// tcpdoctor lab: a Go net/http server (TCP_NODELAY on by default) serving a
// small body. Usage: goserver ADDR MAX_SECONDS
package main

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	addr := os.Args[1]
	secs, _ := strconv.Atoi(os.Args[2])
	body := strings.Repeat("x", 600)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(body))
	})
	go func() {
		time.Sleep(time.Duration(secs) * time.Second)
		os.Exit(0)
	}()
	if err := http.ListenAndServe(addr, nil); err != nil {
		os.Exit(1)
	}
}
