/* The sandbox ("pause") container of the local cluster's real node: holds the pod's namespaces, reaps orphans
 * and exits on SIGINT/SIGTERM. Built static by tools/realnode/images.py, so its image is this one file. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static void on(int sig, void (*handler)(int)) {
    struct sigaction action = {0};
    action.sa_handler = handler;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, NULL);
}

int main(void) {
    on(SIGINT, stop);
    on(SIGTERM, stop);
    on(SIGCHLD, reap);
    for (;;) pause();
}
