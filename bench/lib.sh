# Helpers shared by the bench scripts (sourced, not run).

# free_port FROM: the first port in FROM..FROM+100 nothing listens on.
free_port() {
    for p in $(seq "$1" "$(($1 + 100))"); do
        if ! ss -Htln "sport = :$p" | grep -q .; then echo "$p"; return; fi
    done
    echo "no free port from $1" >&2; exit 1
}

# nginx_conf DIR PORT MASTER EXTRA: writes DIR/nginx.conf for a keep-alive nginx on
# 127.0.0.1:PORT answering "hello" (one worker; MASTER is on or off; EXTRA goes into
# the http block). Logs and temp files stay under DIR.
nginx_conf() {
    mkdir -p "$1/logs" "$1/tmp"
    cat > "$1/nginx.conf" <<CONF
daemon off;
master_process $3;
worker_processes 1;
pid $1/nginx.pid;
error_log $1/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    $4
    keepalive_timeout 65;
    keepalive_requests 1000000;
    client_body_temp_path $1/tmp/body;
    proxy_temp_path $1/tmp/proxy;
    fastcgi_temp_path $1/tmp/fastcgi;
    uwsgi_temp_path $1/tmp/uwsgi;
    scgi_temp_path $1/tmp/scgi;
    server {
        listen 127.0.0.1:$2;
        location / { return 200 "hello"; }
    }
}
CONF
}
