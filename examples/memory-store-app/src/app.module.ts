import { Body, Controller, Module, Post } from '@nestjs/common';
import { Idempotent, IdempotencyModule, InMemoryIdempotencyStore } from 'nest-idempotency';

/** A single-process tool's route: each key runs once, its outcome replayed. */
@Controller('jobs')
export class JobsController {
  runs = 0;

  @Post()
  @Idempotent()
  start(@Body() body: { name: string }) {
    this.runs += 1;
    return { job: this.runs, name: body.name };
  }
}

@Module({
  imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), singleTenant: true })],
  controllers: [JobsController],
})
export class AppModule {}
