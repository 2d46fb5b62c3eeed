// js_loop.js - a CPU loop of named JavaScript functions, for `node --perf-basic-prof`
// under the agent: V8 compiles them to machine code in anonymous memory and names it in
// /tmp/perf-<pid>.map. hotOuter calls hotInner (TurboFan may inline it).
//
// usage: node --perf-basic-prof js_loop.js [CPU seconds = 2]
// Prints "pid N" and "cpu_seconds X" (user + system, as the kernel counts them).
'use strict';

function hotInner(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (x * 31 + i) | 0;
  return x;
}

function hotOuter(n) {
  let x = 0;
  for (let i = 0; i < n; i++) x = (x * 17 + i) | 0;
  return x + hotInner(3 * n);
}

const seconds = Number(process.argv[2] || 2);
const start = process.cpuUsage();
const spent = () => {
  const u = process.cpuUsage(start);
  return (u.user + u.system) / 1e6;
};
let sum = 0;
while (spent() < seconds) {
  for (let k = 0; k < 100; k++) sum += hotOuter(10000);
}
const total = process.cpuUsage();
console.log('pid ' + process.pid);
console.log('sum ' + sum);
console.log('cpu_seconds ' + ((total.user + total.system) / 1e6).toFixed(3));
