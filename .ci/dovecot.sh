#!/usr/bin/env bash
# A throwaway Dovecot for the email adapter's integration tests: IMAP on 127.0.0.1:10143 (plain
# text allowed, STARTTLS offered) and IMAPS on 127.0.0.1:10993, with a certificate for
# `localhost` and `127.0.0.1` from a generated test CA; users support@example.com and
# other@example.com (password `secret`); all state in one temp dir, so it never touches a
# system instance.
#
#   .ci/dovecot.sh start    start (idempotent), then print the tests' environment:
#                             SWITCHYARD_TEST_IMAP=127.0.0.1:10143
#                             SWITCHYARD_TEST_IMAPS=127.0.0.1:10993
#                             SWITCHYARD_TEST_IMAP_CA=<dir>/tls/ca.pem
#                           e.g. `export $(.ci/dovecot.sh start | grep ^SWITCHYARD_)`
#   .ci/dovecot.sh stop     stop (idempotent); mail is kept
#   .ci/dovecot.sh restart  stop, then start
#   .ci/dovecot.sh reset    stop and delete every mailbox and all state
#   .ci/dovecot.sh status   exit 0 when it is listening
#
# Run as root (Dovecot's master process drops privileges itself). Override the location with
# SWITCHYARD_DOVECOT_DIR and the ports with SWITCHYARD_DOVECOT_PORT and
# SWITCHYARD_DOVECOT_TLS_PORT.
#
# OAuth2 mode: with SWITCHYARD_DOVECOT_INTROSPECTION_URL set (e.g. http://127.0.0.1:PORT/introspect)
# the instance also accepts SASL XOAUTH2 and OAUTHBEARER through Dovecot's `oauth2` passdb, which
# POSTs `token=...` to that URL (RFC 7662) and takes the user from its `username` attribute when
# `active` is true; passwords still work for PLAIN/LOGIN. The OAuth2 end-to-end tests start one
# such instance each, in a directory and on ports of their own, with their own introspection
# endpoint, and stop it with the same environment.
set -euo pipefail

DIR="${SWITCHYARD_DOVECOT_DIR:-/tmp/switchyard-dovecot}"
INTROSPECTION_URL="${SWITCHYARD_DOVECOT_INTROSPECTION_URL:-}"
PORT="${SWITCHYARD_DOVECOT_PORT:-10143}"
TLS_PORT="${SWITCHYARD_DOVECOT_TLS_PORT:-10993}"
ADDR="127.0.0.1"
CONF="$DIR/dovecot.conf"
MAIL_USER="switchyard-mail"

listening() {
    # bash's /dev/tcp avoids depending on nc/ss being installed.
    (exec 3<>"/dev/tcp/$ADDR/$PORT") 2>/dev/null
}

# Direct children of a process, from /proc (no procps needed).
children_of() {
    local parent="$1" stat
    for stat in /proc/[0-9]*/stat; do
        # Field 4 is the parent pid; the command name (field 2) may hold spaces, so cut after ')'.
        local rest
        rest="$(sed -e 's/^.*) //' "$stat" 2>/dev/null)" || continue
        set -- $rest
        if [[ "${2:-}" == "$parent" ]]; then
            basename "$(dirname "$stat")"
        fi
    done
}

master_pid() {
    local pidfile="$DIR/run/master.pid"
    [[ -f "$pidfile" ]] || return 1
    local pid
    pid="$(cat "$pidfile")"
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

ensure_installed() {
    if ! command -v dovecot >/dev/null 2>&1; then
        echo "dovecot.sh: installing dovecot-imapd" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dovecot-imapd >/dev/null
        # The package starts a system instance on 143/993; ours does not need it.
        if command -v systemctl >/dev/null 2>&1; then systemctl stop dovecot 2>/dev/null || true; fi
    fi
    if ! id "$MAIL_USER" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$MAIL_USER"
    fi
}

# A test CA and a server certificate it signed; rustls rejects a self-signed leaf as its own
# trust anchor, hence two certificates. Kept across restarts (the tests read the CA file).
make_certificates() {
    local tls="$DIR/tls"
    [[ -f "$tls/server.pem" && -f "$tls/ca.pem" ]] && return 0
    mkdir -p "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj "/CN=Switchyard test CA" -keyout "$tls/ca.key" -out "$tls/ca.pem" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=localhost" -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
    printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$tls/server.ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
        -CAcreateserial -days 3650 -extfile "$tls/server.ext" -out "$tls/server.pem" 2>/dev/null
    chmod 644 "$tls/ca.pem" "$tls/server.pem"
    chmod 600 "$tls/ca.key" "$tls/server.key"
}

write_config() {
    local uid gid
    uid="$(id -u "$MAIL_USER")"
    gid="$(id -g "$MAIL_USER")"
    mkdir -p "$DIR/run" "$DIR/state" "$DIR/home"
    make_certificates
    chmod 755 "$DIR" "$DIR/home"
    chown "$MAIL_USER:$MAIL_USER" "$DIR/home"
    # passwd-file: user:password:uid:gid:gecos:home:shell:extra
    {
        for user in support@example.com other@example.com; do
            echo "$user:{PLAIN}secret::::$DIR/home/$user::"
        done
    } >"$DIR/users"
    chmod 644 "$DIR/users"
    local mechanisms="plain login" passdbs
    passdbs="passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u $DIR/users
}"
    if [[ -n "$INTROSPECTION_URL" ]]; then
        mechanisms="plain login xoauth2 oauthbearer"
        cat >"$DIR/dovecot-oauth2.conf.ext" <<OAUTH2
introspection_mode = post
introspection_url = $INTROSPECTION_URL
force_introspection = yes
username_attribute = username
active_attribute = active
active_value = true
timeout_msecs = 10000
OAUTH2
        chmod 644 "$DIR/dovecot-oauth2.conf.ext"
        passdbs="passdb {
  driver = oauth2
  mechanisms = xoauth2 oauthbearer
  args = $DIR/dovecot-oauth2.conf.ext
}
passdb {
  driver = passwd-file
  mechanisms = plain login
  args = scheme=PLAIN username_format=%u $DIR/users
}"
    fi
    cat >"$CONF" <<CONF
# Generated by .ci/dovecot.sh: a test-only instance, never for production.
instance_name = switchyard-test${INTROSPECTION_URL:+-$PORT}
base_dir = $DIR/run
state_dir = $DIR/state
listen = $ADDR
protocols = imap
ssl = yes
ssl_cert = <$DIR/tls/server.pem
ssl_key = <$DIR/tls/server.key
# Plain-text login without TLS stays allowed: most tests speak plain IMAP on loopback.
disable_plaintext_auth = no
auth_mechanisms = $mechanisms
log_path = $DIR/dovecot.log
info_log_path = $DIR/dovecot.log
mail_location = maildir:~/Maildir
mail_uid = $uid
mail_gid = $gid
first_valid_uid = 1
first_valid_gid = 1
# Failed logins are answered at once (the tests retry bad passwords quickly).
auth_failure_delay = 0 secs
login_trusted_networks = 127.0.0.0/8
# Notice new mail within a second while a client IDLEs (the default is 30 s).
mailbox_idle_check_interval = 1 secs
$passdbs
userdb {
  driver = passwd-file
  args = username_format=%u $DIR/users
}
service imap-login {
  inet_listener imap {
    address = $ADDR
    port = $PORT
  }
  inet_listener imaps {
    address = $ADDR
    port = $TLS_PORT
  }
}
namespace inbox {
  inbox = yes
  separator = /
}
CONF
}

start() {
    ensure_installed
    if ! command -v openssl >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
    fi
    if master_pid >/dev/null && listening; then
        echo "dovecot already listening on $ADDR:$PORT"
    else
        write_config
        # Detached from our stdout/stderr: a caller reading them through a pipe (cargo test | grep)
        # would otherwise wait for the daemon to exit.
        dovecot -c "$CONF" </dev/null >>"$DIR/startup.log" 2>&1
        for _ in $(seq 1 100); do
            listening && break
            sleep 0.1
        done
        if ! listening; then
            echo "dovecot did not start listening on $ADDR:$PORT; log:" >&2
            tail -n 30 "$DIR/startup.log" "$DIR/dovecot.log" >&2 || true
            exit 1
        fi
        echo "dovecot listening on $ADDR:$PORT (state in $DIR)"
    fi
    echo "SWITCHYARD_TEST_IMAP=$ADDR:$PORT"
    echo "SWITCHYARD_TEST_IMAPS=$ADDR:$TLS_PORT"
    echo "SWITCHYARD_TEST_IMAP_CA=$DIR/tls/ca.pem"
}

stop() {
    local pid children
    if pid="$(master_pid)"; then
        # Client sessions (imap processes) outlive their master; a stopped server must drop
        # every connection, so remember them and end them too.
        children="$(children_of "$pid")"
        kill "$pid"
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        for child in $children; do
            kill "$child" 2>/dev/null || true
        done
    fi
    for _ in $(seq 1 50); do
        listening || break
        sleep 0.1
    done
    if listening; then
        echo "something still listens on $ADDR:$PORT" >&2
        exit 1
    fi
    echo "dovecot stopped ($ADDR:$PORT)"
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    reset) stop; rm -rf "$DIR"; echo "removed $DIR" ;;
    status) if master_pid >/dev/null && listening; then echo "listening on $ADDR:$PORT"; else echo "not running"; exit 1; fi ;;
    *) echo "usage: $0 start|stop|restart|reset|status" >&2; exit 2 ;;
esac
