'use strict';
require('./checks').checks('fastify5');
